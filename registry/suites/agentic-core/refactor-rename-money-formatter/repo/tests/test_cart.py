from shop.cart import Cart


def test_total():
    cart = Cart()
    cart.add("tea", "3.50")
    cart.add("cake", "1234.05")
    assert cart.total() == "1,237.55 EUR"
