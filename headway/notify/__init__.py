"""Notification channels' parts that need no database: the schemes a channel may use
(`notify.schemes`), Apprise URLs checked and shown without their tokens (`notify.urls`),
one send with the name lookups pinned to checked addresses (`notify.send`, on the threads
of `notify.guard`), and the messages' text (`notify.messages`). Import them from those
modules.

Importing this package does not load Apprise; the first check or send does.
"""
