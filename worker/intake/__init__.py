"""The way in: the SourceEvent a producer sends, its validation, and the emitter that admits and stores events."""
