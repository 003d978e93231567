"""Write the simulated fallback demo study (``cases.parquet``, ``runs.parquet``).

The committed demo data (cases, runs, probe_predictions, run_manifest.json) are made by
the MONAI networks of ``inference_runner.demo``: ``make demo-data`` or ``clinrel demo
--regenerate --out DIR`` (1-3 minutes on 2 CPU cores, deterministic for a seed). This
script writes a *simulated* study of the same shape (model_A..C, enc_01..08), for tests
or a machine where training is too slow; its reference panel would be enc_01..enc_05. Run: ``python -m clinrel.demo_data.make_simulated DIR``.
"""
from __future__ import annotations

import sys
from pathlib import Path

from stats import simulate


def main(out: str | Path) -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cases = simulate.benchx_cohort(800, n_models=3, n_sites=8, seed=20261130).data
    cases.to_parquet(out / "cases.parquet", index=False)
    runs = simulate.crs_runs(n_encoders=8, n_datasets=2, n_seeds=3, seed=20261130).data
    runs.to_parquet(out / "runs.parquet", index=False)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)
