"""The `llamay` command line: one module per subcommand, all thin consumers of the engine."""
