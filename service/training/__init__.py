"""Fine-tuning, ONNX export and model cards for the three shipped cross-encoders."""
