"""HTTP adapters: parse the request, call one service function, serialize the answer."""
