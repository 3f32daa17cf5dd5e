"""Grouping words that are anagrams of each other."""


def is_anagram(a: str, b: str) -> bool:
    return sorted(a.lower()) == sorted(b.lower())


def group_anagrams(words: list[str]) -> list[list[str]]:
    """Anagram groups, in order of first appearance; words keep their input order."""
    groups: list[list[str]] = []
    for word in words:
        for group in groups:
            if is_anagram(group[0], word):
                group.append(word)
                break
        else:
            groups.append([word])
    return groups
