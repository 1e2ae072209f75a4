"""Data: the tables read in, the model store, the run's journal, and the files a run writes."""
