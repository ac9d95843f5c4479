"""The browser pages: the home page, a space's live dashboard and a share link's view."""
