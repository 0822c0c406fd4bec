"""The error an export folder raises when it does not load: one type for encoder and baseline exports alike."""


class ExportError(ValueError):
    """An export folder that does not load or is inconsistent; the message is one line naming the folder."""
