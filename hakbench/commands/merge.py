"""``hakbench merge``: join the shards of one matrix run into the run one machine would make."""

from __future__ import annotations

from pathlib import Path

import click

from hakbench.commands.matrix import print_summaries
from hakbench.experiments import matrix, shard


@click.command("merge")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="merged run"
)
def merge_cmd(dirs, out):
    """Merge the run directories of `hakbench matrix FILE --shard K/N` (K = 1..N) into OUT.

    The shards must come from the same matrix file, rounds, seed and commit, each exactly
    once (else exit 2 naming what differs). OUT gets samples.jsonl, meta.json (with the
    shards it came from) and summary.csv, as one unsharded run would have written them.
    Ratios are only ever taken inside a shard, so shards from different machines are never
    compared with each other; the merge says when their machines differ.
    """
    meta, samples, notes = shard.merge(list(dirs), out)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    print_summaries(matrix.write_dir_summary(out))
    click.echo(f"merged {len(dirs)} shards, {len(samples)} samples, {len(meta['cells'])} cells")
    click.echo(str(out))


COMMANDS = [merge_cmd]
