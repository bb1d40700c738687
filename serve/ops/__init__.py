"""Operations: the retraining scheduler, the retention sweep, logging and Prometheus metrics."""
