"""For the data tests: a folder of small text documents."""


def write_files(folder, n, size=400):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"doc{i:03d}.txt").write_text(f"document {i}\n" + "abc def\n" * (size // 8))
    return folder
