"""For the data tests: a folder of small text documents."""


def write_files(folder, n, size=400):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"doc{i:03d}.txt").write_text(f"document {i}\n" + "abc def\n" * (size // 8))
    return folder


def write_short_files(folder, n, seed=0):
    """``n`` documents of varied lengths (5 to 60 characters): a window of 16 or more tokens
    spans several of them."""
    import random
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        words = " ".join(rng.choice(["ab", "cde", "f", "ghij"]) for _ in range(rng.randint(1, 12)))
        (folder / f"short{i:03d}.txt").write_text(f"{i}: {words}\n")
    return folder
