"""gpufleet: schedule model-serving replicas across Kubernetes GPU clusters by free GPUs."""
