"""Run files, their replay and report, diagrams, traces and the command line."""
