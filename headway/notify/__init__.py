"""Notification channels: the schemes a channel may use (`notify.schemes`), Apprise URLs
checked and shown without their tokens (`notify.urls`), one send with the name lookups
pinned to checked addresses (`notify.send`, on the threads of `notify.guard`), the
messages' text (`notify.messages`); and the loops that use the database: a channel's queue
sent (`notify.deliver`), stall clocks (`notify.stalls`), late runs (`notify.late`), live
messages (`notify.live`). Import them from those modules.

Importing this package does not load Apprise; the first check or send does.
"""
