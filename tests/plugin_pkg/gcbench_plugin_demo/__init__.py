"""A demo gcbench plugin: scaled sign compression (sign bits plus the mean magnitude), from its own package."""
