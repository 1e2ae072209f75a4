"""What the CLI runs: predict, train, store check, report and evaluate, each over the layers below."""
