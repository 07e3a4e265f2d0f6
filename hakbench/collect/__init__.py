"""Parsers: text in, data out. Tested on captured real output without starting a process."""
