"""One job: load an IP's model, scaler and std, score its points, and judge them (docs/design.md §3)."""
