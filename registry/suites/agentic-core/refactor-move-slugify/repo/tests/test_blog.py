from textkit.blog import headline, post_url


def test_post_url():
    assert post_url("Hello, World!", 2024) == "/blog/2024/hello-world/"


def test_headline():
    assert headline("the quick fox") == "The Quick Fox"
