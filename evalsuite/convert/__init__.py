"""Converters from released data files to the formats evalsuite's trainers read (pure data, no models)."""
