"""What self-iteration stores and shows: skill documents with their history, and the receipts of completed runs."""
