"""What the tutorial's scripts need beyond the tutorial: one module a concern.

    startup       before TensorFlow loads: oneDNN kernels, a quiet console
    console       TensorFlow's log noise kept off the console
    run_flags     the flags every script has beyond the original's; checks
    download      fetching and checking the data files
    sessions      session configs and thread counts, by one rule
    train_dirs    a train_dir from lock to "where to start"; full disk, NaN
    checkpoints   finding, checking and restoring checkpoints
    signals       Ctrl-C and SIGTERM stop after a step, with a checkpoint
    summaries     when training writes its TensorBoard summaries
    fast_ops      faster equivalents of standard ops, each naming the op
    precision     --mixed_precision: the compute dtype, float16's loss scale
    gpus          --split_gpus: virtual GPUs for towers
    clusters      the ps/worker cluster from flags or TF_CONFIG
    cluster_sessions  a worker's sessions lost and re-created; tasks gone
    eval_report   evaluation's per-class table and confusion matrix
    picture       text drawn into images (the confusion matrix's labels)

Nothing here imports a script, and importing this package loads no
TensorFlow (startup must run before it does).
"""
