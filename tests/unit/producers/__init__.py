"""Unit tests of the web app's shared pieces (producers/http/web_common.py) and its route table."""
