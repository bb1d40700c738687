"""The HTTP surface: the FastAPI app, the key check and body limit, request validation, the
schemas, API keys, the routes and the trajectory viewer; and the Python client of that API."""
