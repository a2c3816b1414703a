"""The tailsim version, at the floor so that any layer can record it without importing the API."""

__version__ = "0.1.0"
