"""Reports: Markdown tables and plots, made from tidy tables."""
