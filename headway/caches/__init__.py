"""What the service keeps in memory to answer without a query, each cache built on one
bounded building block (`bounded.Bounded`) and registered with the unit of work
(`service.unit.Writes`), which tells it of every change after its commit:

- `families`: task families (a task and its children), and their children's answers;
- `spaces`: small spaces held whole, pages of big ones, answers of unchanged tasks;
- `heads`: spaces' titles and icons;
- `links`: the space of each share link, and which task an id under a link names;
- `badges`: what each badge said last, for a moment.

How far an entry is trusted is the coherence's to say (see `coherence`).
"""
