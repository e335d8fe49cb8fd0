"""Small PyFlink jobs the control-plane integration tests submit to the real local Flink."""
