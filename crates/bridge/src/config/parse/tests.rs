use super::*;

/// The lines of `text` with `fill` at `line`:`column`, trailing spaces trimmed.
fn blank(text: &str, line: usize, column: usize, fill: &str) -> Vec<String> {
    blank_key(text, line, column, fill)
        .unwrap()
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect()
}

#[test]
fn text_of_the_wrong_kind_is_emptied_in_place_whatever_its_shape() {
    // A flow mapping over two lines, as a block key's value.
    let text = "a:\n  url: {host: a,\n    port: 1}\nb: 2\n";
    assert_eq!(blank(text, 2, 8, "\"\""), ["a:", "  url: \"\"", "", "b: 2"]);
    // An item of a flow list keeps the comma after it.
    let text = "hosts: [{a: b}, x.example]\n";
    assert_eq!(blank(text, 1, 9, "\"\""), ["hosts: [\"\"    , x.example]"]);
    // A value cut at its line's end gets its whole fill there.
    let text = "a: {name: c, url: [\n  x], p: 1}\n";
    assert_eq!(
        blank(text, 1, 19, "\"\""),
        ["a: {name: c, url: \"\"", "    , p: 1}"]
    );
    // A block list item that is a mapping.
    let text = "r:\n  - a\n  - name: x\n    more: y\n  - c\n";
    assert_eq!(
        blank(text, 3, 5, "\"\""),
        ["r:", "  - a", "  - \"\"", "", "  - c"]
    );
}
