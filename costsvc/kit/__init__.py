"""Helpers every domain shares, each the one home of its rule: UTC times, hour/day/month floors and
ISO-Z text (times), the API's time windows (windows), money and its text form (money), CSV cells
(csv_cells), how a message quotes an input (quoting), and the settings (settings)."""
