"""The book's page helpers: readability, slides and other helpers that build pages."""
