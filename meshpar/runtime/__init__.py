"""Running on real devices: TensorFlow cluster files, the training process as a
client of gRPC workers, worker servers, a LocalCluster of throttled worker
processes, and profiling of devices."""
