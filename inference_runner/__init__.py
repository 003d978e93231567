"""clinrel's inference runner: the only torch/MONAI code. It writes files in the table
contracts (cases, runs, probe_predictions, metadata evidence) and computes no statistics
beyond what those contracts hold.

Modules: ``config`` (YAML run configs, validated first), ``segment`` (sliding-window
segmentation -> cases), ``probe`` + ``corruptions`` (frozen encoders -> runs),
``metadata`` (DICOM/report extraction with evidence), ``demo`` (the embedded demo study,
made by small networks), ``writers`` (parquet + run_manifest.json).
"""
