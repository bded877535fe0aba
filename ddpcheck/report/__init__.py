"""The report side: the Report model and everything that shows, saves or compares one."""
