// Superslabs: 2 MiB-aligned regions split into 32 pages of 64 KiB (see internal.h), the
// registry that tells our regions from foreign memory, and the list of superslabs abandoned
// by exited threads with blocks still live.
#include <pthread.h>

#include "internal.h"

_Atomic uint8_t hak_registry[HAK_REGISTRY_SIZE];

void hak_registry_set(uintptr_t ss, int on) {
    atomic_store_explicit(&hak_registry[ss >> HAK_SS_SHIFT], (uint8_t)on, memory_order_release);
}

static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static hak_superslab *abandoned_first;
static _Atomic size_t abandoned_count; // read without the lock as a hint

hak_superslab *hak_superslab_acquire(hak_heap *heap) {
    hak_superslab *ss = hak_os_superslab_get();
    if (!ss) return NULL;
    ss->kind = HAK_SS_SMALL;
    atomic_store_explicit(&ss->owner, heap, memory_order_relaxed);
    ss->free_page_mask = (uint32_t)((1ull << HAK_PAGES_PER_SS) - 1);
    hak_stat_add(ss_os, alloc, 1);
    return ss;
}

void hak_superslab_release(hak_superslab *ss) {
    hak_assert(ss->pages_in_use == 0);
    hak_stat_add(ss_os, free, 1);
    hak_os_superslab_put(ss);
}

hak_page *hak_superslab_page_alloc(hak_superslab *ss) {
    if (!ss->free_page_mask) return NULL;
    unsigned i = (unsigned)__builtin_ctz(ss->free_page_mask);
    ss->free_page_mask &= ~(1u << i);
    ss->pages_in_use++;
    return &ss->pages[i];
}

void hak_superslab_page_free(hak_superslab *ss, hak_page *page) {
    unsigned i = (unsigned)(page - ss->pages);
    hak_assert(!(ss->free_page_mask & (1u << i)));
    // A later free() of a stale pointer into this slot must not look like an owned page.
    page->in_use = 0;
    hak_page_set_local_owner(page, NULL);
    atomic_store_explicit(&page->xthread_free, 0, memory_order_relaxed);
    page->free = page->local_free = NULL;
    ss->free_page_mask |= 1u << i;
    ss->pages_in_use--;
}

void hak_superslab_abandon(hak_superslab *ss) {
    hak_stat_add(ss_os, abandon, 1);
    atomic_store_explicit(&ss->owner, NULL, memory_order_seq_cst);
    pthread_mutex_lock(&abandoned_lock);
    ss->next = abandoned_first;
    ss->prev = NULL;
    abandoned_first = ss;
    atomic_fetch_add_explicit(&abandoned_count, 1, memory_order_relaxed);
    pthread_mutex_unlock(&abandoned_lock);
}

hak_superslab *hak_superslab_pop_abandoned(void) {
    if (!atomic_load_explicit(&abandoned_count, memory_order_relaxed)) return NULL;
    pthread_mutex_lock(&abandoned_lock);
    hak_superslab *ss = abandoned_first;
    if (ss) {
        abandoned_first = ss->next;
        atomic_fetch_sub_explicit(&abandoned_count, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&abandoned_lock);
    if (ss) hak_stat_add(ss_os, adopt, 1);
    return ss;
}

void hak_superslab_fork_prepare(void) {
    pthread_mutex_lock(&abandoned_lock);
}
void hak_superslab_fork_parent(void) {
    pthread_mutex_unlock(&abandoned_lock);
}
void hak_superslab_fork_child(void) {
    pthread_mutex_init(&abandoned_lock, NULL);
}
