/// A request body that names the fields it takes from its own coding keys, so that the server
/// refuses a field it does not know, by name, instead of ignoring it (a misspelt
/// `idempotency_key` would otherwise send an event twice), and no list of names is kept beside
/// the type.
public protocol RequestFields {
    /// The object's field names.
    static var fields: Set<String> { get }
    /// The field names of the objects inside it, by dotted path (`schedule.calendar`).
    static var nestedFields: [String: Set<String>] { get }
}

extension RequestFields {
    public static var nestedFields: [String: Set<String>] { [:] }

    /// This object's fields at `path` inside another, and the objects inside it, for the
    /// other's ``nestedFields``.
    public static func fields(at path: String) -> [String: Set<String>] {
        var result = [path: fields]
        for (inner, names) in nestedFields { result[path + "." + inner] = names }
        return result
    }
}

extension CodingKey where Self: CaseIterable {
    /// Every key's name, as the JSON spells it.
    public static var names: Set<String> { Set(allCases.map(\.stringValue)) }
}
