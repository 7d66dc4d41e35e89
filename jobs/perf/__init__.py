"""Performance measurements of df_ray (see README.md in this folder)."""
