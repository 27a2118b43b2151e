"""Training through ``tf.estimator`` on an uneven mesh: the model_fn, metrics and
checkpoints across meshes."""
