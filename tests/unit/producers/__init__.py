"""Unit tests of the web app's shared pieces (producers/_web_common.py) and its route table."""
