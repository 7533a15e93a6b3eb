"""The modal screens, one module per screen or family: each opens over the workbench,
shows or asks one thing, and closes with Esc. ``dialogs`` holds the frame they share."""
