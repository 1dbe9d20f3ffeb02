"""What the tutorial's scripts need beyond the tutorial: one module a concern
(each module's docstring says which).

Nothing here imports a tutorial module (a script, cifar10, cifar10_input),
and importing this package loads no TensorFlow (console.before_tensorflow
must run before it does).
"""
