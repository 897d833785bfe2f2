"""PyTorch workloads: PARAM's native operator set, whole models and fbgemm_gpu embedding ops."""
