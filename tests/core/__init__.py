"""The engine and its table: rows, guards and effects, replay, intake, budgets, typed output and
context, with no driver's I/O."""
