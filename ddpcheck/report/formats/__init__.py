"""Where a report is written besides the terminal: one module per format, each behind `write(report, path)`.

json, junit and prometheus here; the HTML page is the report/html/ package (its `write`).
"""
