"""The static site ``hakbench publish`` writes: HTML pages and plotly charts drawn from the
tables alone (the scorecard, its history across commits, run directories)."""
