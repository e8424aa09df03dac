"""remat: optimal tensor rematerialization (Checkmate, MLSys 2020) on open solvers; see ARCHITECTURE.md."""
