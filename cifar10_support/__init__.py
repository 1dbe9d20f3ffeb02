"""What the tutorial's scripts need beyond the tutorial: one module a concern.

    startup       before TensorFlow loads: oneDNN kernels, a quiet console
    console       TensorFlow's log noise kept off the console
    run_flags     the flags every script has beyond the original's; checks
    data_files    the data files: names, record layout, the check, DataError
    download      fetching and checking the data files
    sessions      session configs and thread counts, by one rule
    run_settings  one value for a training run's settings, from the flags
    train_dirs    a train_dir from lock to "where to start"; full disk, NaN
    saving        a training session's restoring scaffold and saving hooks
    checkpoints   finding, checking and restoring checkpoints
    signals       Ctrl-C and SIGTERM stop after a step, with a checkpoint
    summaries     what training writes to TensorBoard, and when
    fast_ops      faster equivalents of standard ops, each naming the op
    precision     --mixed_precision: the compute dtype, float16's loss scale
    gpus          --split_gpus: virtual GPUs for towers
    towers        the towers' batch queue (slim's prefetch_queue); checks
    clusters      the ps/worker cluster from flags or TF_CONFIG
    cluster_sessions  a worker's sessions lost and re-created; tasks gone
    eval_report   evaluation's per-class table and confusion matrix
    eval_run      evaluation's settings; following a training run
    picture       text drawn into images (the confusion matrix's labels)

Nothing here imports a tutorial module (a script, cifar10, cifar10_input),
and importing this package loads no TensorFlow (startup must run before it
does).
"""
