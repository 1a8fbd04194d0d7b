use super::*;

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn costs(values: &[u64]) -> Vec<Cost> {
    values
        .iter()
        .map(|&value| Cost { value, samples: 1 })
        .collect()
}

#[test]
fn precedence_parentheses_and_numbers() {
    let m = names(&["a", "b"]);
    let v = |f: &str| {
        Derived::parse(&format!("x = {f}"), &m)
            .unwrap()
            .value(&costs(&[6, 3]))
    };
    assert_eq!(v("a + b * 2"), Some(12.0));
    assert_eq!(v("(a + b) * 2"), Some(18.0));
    assert_eq!(v("a / b / 2"), Some(1.0));
    assert_eq!(v("-a + 1e1"), Some(4.0));
    assert_eq!(v("a - -b"), Some(9.0));
    assert_eq!(v("a / (b - 3)"), None, "division by zero has no value");
    assert_eq!(v("2.5e-1 * a"), Some(1.5));
}

#[test]
fn names_with_dashes_are_read_as_the_longest_metric() {
    let m = names(&["cpu-clock", "page-faults", "cycles", "instructions"]);
    let d = Derived::parse("fps = page-faults / (cpu-clock / 1e9)", &m).unwrap();
    assert_eq!(d.inputs(), [0, 1]);
    assert_eq!(d.value(&costs(&[2_000_000_000, 500, 0, 0])), Some(250.0));
    let d = Derived::parse("spare = cycles-instructions", &m).unwrap();
    assert_eq!(d.inputs(), [2, 3]);
    assert_eq!(d.value(&costs(&[0, 0, 10, 4])), Some(6.0));
}

#[test]
fn bad_definitions_say_what_is_wrong() {
    let m = names(&["cycles", "instructions"]);
    assert!(matches!(
        Derived::parse("instructions / cycles", &m),
        Err(FormulaError::NotADefinition(_))
    ));
    let unknown = Derived::parse("x = cycles / flops", &m).unwrap_err();
    assert!(unknown.to_string().contains("'flops'"), "{unknown}");
    assert!(
        unknown.to_string().contains("cycles, instructions"),
        "{unknown}"
    );
    for bad in [
        "x = (cycles",
        "x = cycles /",
        "x = cycles cycles",
        "x = cycles $ 2",
    ] {
        assert!(
            matches!(Derived::parse(bad, &m), Err(FormulaError::Syntax { .. })),
            "{bad}"
        );
    }
}

#[test]
fn built_in_ratios_need_their_inputs() {
    let m = names(&["cycles", "instructions"]);
    let ipc = Derived::built_in("ipc", &m).unwrap();
    assert_eq!(ipc.value(&costs(&[200, 300])), Some(1.5));
    assert!(Derived::built_in("cache-miss-ratio", &m).is_none());
    assert!(Derived::built_in("nonsense", &m).is_none());
}

#[test]
fn a_formula_follows_its_metrics_into_another_list() {
    let db = names(&["cpu-clock", "page-faults", "off-cpu"]);
    let d = Derived::parse("r = off-cpu / cpu-clock", &db).unwrap();
    assert_eq!(d.inputs(), [0, 2]);
    let view = names(&["off-cpu", "cpu-clock"]);
    let moved = d.against(&view).unwrap();
    assert_eq!(moved.value(&costs(&[30, 10])), Some(3.0));
}
