"""The command line against fake HTTP servers and its own parser (producers/cli/): deadlines, answers that are
not the API's, output formats shared by sibling verbs, the verb named in error lines, help on every flag."""
