"""The only code that reads a Hydra DictConfig: it unpacks configs into typed library calls."""
