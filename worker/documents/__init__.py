"""What is stored and shown of an event and its chain: the projection, the stored forms and their codecs, status records."""
