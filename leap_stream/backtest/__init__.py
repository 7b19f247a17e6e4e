"""The backtest shell: a history through the core in-process (replay), its figures and report."""

__all__: list[str] = []
