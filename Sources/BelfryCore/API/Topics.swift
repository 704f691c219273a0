/// The body of `PUT` and `DELETE /v1/topics/{topic}/subscribers`: external user ids.
public struct TopicSubscribers: Codable, Hashable, Sendable {
    public var users: [String]

    public init(users: [String]) {
        self.users = users
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case users
    }
}

extension TopicSubscribers: RequestFields {
    public static var fields: Set<String> { CodingKeys.names }
}

/// `GET /v1/topics/{topic}`: a topic and how many users follow it.
public struct TopicSummary: Codable, Hashable, Sendable {
    public var topic: String
    public var subscribers: Int

    public init(topic: String, subscribers: Int) {
        self.topic = topic
        self.subscribers = subscribers
    }
}

/// `GET /v1/me/topics`: the topics the user follows, in name order.
public struct UserTopics: Codable, Hashable, Sendable {
    public var topics: [String]

    public init(topics: [String]) {
        self.topics = topics
    }
}
