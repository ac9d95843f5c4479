"""Badges of a share link: what a task's or a space's badge says (`states`), in which
colours (`colours`), drawn as SVG from a table of character widths (`svg`). Pure code:
the routes (`api.badges`) read the tasks and send what these modules make."""
