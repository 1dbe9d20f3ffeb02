"""What the tutorial's scripts need beyond the tutorial, a module a concern.
Nothing here imports a tutorial module (a script, cifar10, cifar10_input);
importing this package loads no TensorFlow (console.before_tensorflow first).
"""
