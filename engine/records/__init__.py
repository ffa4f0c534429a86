"""What the engine writes down and reads back: the journal, incident records and their store, the run log, the failure ledger, failure signatures, the attempt history."""
