"""Pure core: models and logic that import neither Airflow nor PyFlink."""
