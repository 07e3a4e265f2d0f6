"""The statistics: paired ratios and verdicts, the sequential stop rule, soak trends. Pure
figures; imports only ``hakbench.core``."""
